# Install layout and the installed files' RUNPATHs.
#
# The library directory is Debian's multiarch one (lib/x86_64-linux-gnu),
# as Debian's own CMake builds pass it, under any prefix: the loader and
# pkg-config search it below /usr and /usr/local alike.  Elsewhere, or given
# -DCMAKE_INSTALL_LIBDIR, GNUInstallDirs decides.
#
# RUNPATHs are settled when the files are installed, for the prefix they
# are installed under (cpack installs below /usr whatever the build was
# configured with): none when the library lands in a directory the dynamic
# loader searches anyway, else the library directory.  The build tree's
# RUNPATH never reaches an installed file.

if(NOT DEFINED CMAKE_INSTALL_LIBDIR AND CMAKE_LIBRARY_ARCHITECTURE
   AND EXISTS /etc/debian_version)
  set(CMAKE_INSTALL_LIBDIR "lib/${CMAKE_LIBRARY_ARCHITECTURE}" CACHE PATH
      "Object code libraries (lib/${CMAKE_LIBRARY_ARCHITECTURE}: Debian's multiarch directory)")
endif()
include(GNUInstallDirs)

# The directories ld.so searches without being told (its trusted
# directories): a library there needs no RUNPATH to be found.
set(ROV_LOADER_DIRS ${CMAKE_PLATFORM_IMPLICIT_LINK_DIRECTORIES})
if(CMAKE_LIBRARY_ARCHITECTURE)
  list(APPEND ROV_LOADER_DIRS /lib/${CMAKE_LIBRARY_ARCHITECTURE}
                              /usr/lib/${CMAKE_LIBRARY_ARCHITECTURE})
endif()

# rov_install_binary(TARGET DESTINATION COMPONENT)
#   Installs an executable or a module (a plugin) whose RUNPATH names the
#   library directory it was installed with ($ORIGIN-relative RUNPATHs are
#   kept: they follow the prefix), or has none when that is a loader
#   directory.  TARGET's INSTALL_RPATH is the one for the configured prefix.
function(rov_install_binary target destination component)
  install(TARGETS ${target}
          RUNTIME DESTINATION "${destination}" COMPONENT ${component}
          LIBRARY DESTINATION "${destination}" COMPONENT ${component})
  get_target_property(_configured ${target} INSTALL_RPATH)
  if(NOT _configured)
    message(FATAL_ERROR "rov_install_binary(${target}): the target has no INSTALL_RPATH")
  endif()
  if(_configured MATCHES "^\\$ORIGIN")
    set(_elsewhere "")
  else()
    # The installed entry has the room of the configured one, no more.
    string(LENGTH "${_configured}" _room)
    set(_elsewhere "
    elseif(NOT \"\${_libdir}\" STREQUAL [[${_configured}]])
      string(LENGTH \"\${_libdir}\" _len)
      if(_len GREATER ${_room})
        message(FATAL_ERROR \"\${_file}: its RUNPATH was made for ${_configured} and has \"
                \"no room for \${_libdir}: configure with -DCMAKE_INSTALL_PREFIX=\${CMAKE_INSTALL_PREFIX} \"
                \"to install there\")
      endif()
      file(RPATH_CHANGE FILE \"\${_file}\" OLD_RPATH [[${_configured}]] NEW_RPATH \"\${_libdir}\")")
  endif()
  install(CODE "
    set(_dest [[${destination}]])
    set(_libdir [[${CMAKE_INSTALL_LIBDIR}]])
    set(_loader_dirs [[${ROV_LOADER_DIRS}]])
    foreach(_dir _dest _libdir)
      if(NOT IS_ABSOLUTE \"\${\${_dir}}\")
        set(\${_dir} \"\${CMAKE_INSTALL_PREFIX}/\${\${_dir}}\")
      endif()
    endforeach()
    set(_file \"\$ENV{DESTDIR}\${_dest}/$<TARGET_FILE_NAME:${target}>\")
    list(FIND _loader_dirs \"\${_libdir}\" _found)   # (no IN_LIST: install scripts set no policies)
    if(_found GREATER -1)
      message(STATUS \"RUNPATH removed (the loader searches \${_libdir}): \${_file}\")
      file(RPATH_REMOVE FILE \"\${_file}\")${_elsewhere}
    endif()" COMPONENT ${component})
endfunction()

# rov_install_pkgconfig(PC_IN COMPONENT)
#   Installs PC_IN (a .pc.in) as <libdir>/pkgconfig/<name>.pc, written when
#   it is installed: @ROV_PC_PREFIX@ is the prefix it is installed under,
#   @ROV_PC_LIBDIR@ and @ROV_PC_INCLUDEDIR@ the directories below it,
#   @PROJECT_VERSION@ the version.
function(rov_install_pkgconfig pc_in component)
  get_filename_component(_name "${pc_in}" NAME_WLE)
  set(_pc "${CMAKE_CURRENT_BINARY_DIR}/${_name}")
  install(CODE "
    set(ROV_PC_PREFIX \"\${CMAKE_INSTALL_PREFIX}\")
    set(ROV_PC_LIBDIR [[${CMAKE_INSTALL_LIBDIR}]])
    set(ROV_PC_INCLUDEDIR [[${CMAKE_INSTALL_INCLUDEDIR}]])
    foreach(_var ROV_PC_LIBDIR ROV_PC_INCLUDEDIR)
      if(NOT IS_ABSOLUTE \"\${\${_var}}\")
        set(\${_var} \"\\\${prefix}/\${\${_var}}\")
      endif()
    endforeach()
    set(PROJECT_VERSION [[${PROJECT_VERSION}]])
    configure_file([[${pc_in}]] [[${_pc}]] @ONLY)" COMPONENT ${component})
  install(FILES "${_pc}" DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig COMPONENT ${component})
endfunction()
